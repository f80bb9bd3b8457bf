"""The application: the ``pyrolik`` command line and the demonstration."""
