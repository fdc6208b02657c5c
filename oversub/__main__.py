"""`python -m oversub`."""

from oversub.cli import main

if __name__ == "__main__":
    main()
