"""The bottom layer: pure tensor code (importance statistics, shared type aliases) that imports no
other pyrolik subpackage.
"""
