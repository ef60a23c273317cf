"""`python -m atoll` runs the command-line interface."""

from atoll.cli.main import main

raise SystemExit(main())
