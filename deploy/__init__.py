"""`hsx deploy` (install.py; the runner's unit in unit.py) beside what it installs: the systemd
units, the Slack app manifest and the example config. Imports runner.contract, remote and
patches, never bot."""
