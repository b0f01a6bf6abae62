"""``python -m osqueue``: the ``osqueue`` command line (see :mod:`osqueue.cli`)."""

from osqueue.cli import main

if __name__ == "__main__":
    main()
