"""`python -m oversub`: the same entry as the console script (see `oversub.launch`)."""

from oversub.launch import main

if __name__ == "__main__":
    main()
