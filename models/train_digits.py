"""``python -m pyrolik_models.train_digits``: kept at its old place; the code is in
:mod:`.training.train_digits`."""

from .training.train_digits import *  # noqa: F401,F403
from .training.train_digits import __all__, main  # noqa: F401

if __name__ == "__main__":
    main()
