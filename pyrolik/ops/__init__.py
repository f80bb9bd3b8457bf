"""The bottom layer: pure tensor code that imports no other pyrolik subpackage."""
