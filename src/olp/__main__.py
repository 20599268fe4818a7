from __future__ import annotations

from olp.cli import main

if __name__ == "__main__":
    main()
