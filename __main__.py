"""``python -m tpopt``: the ``tpopt`` command line."""

from tpopt.cli.main import main

if __name__ == "__main__":
    main()
