"""``python -m joulectl``."""

from joulectl.cli import main

if __name__ == "__main__":
    main()
