"""Transition kernels, their adaptation, and annealing schedules."""
