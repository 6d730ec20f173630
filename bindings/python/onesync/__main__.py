"""python -m onesync: the onesync command."""
import sys

from onesync._cli import main

sys.exit(main())
