"""``python -m pyrolik_models.train_mnist``: kept at its old place; the code is in
:mod:`.training.train_mnist`."""

from .training.train_mnist import *  # noqa: F401,F403
from .training.train_mnist import __all__, main  # noqa: F401

if __name__ == "__main__":
    main()
