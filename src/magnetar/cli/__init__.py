"""The `magnetar` command. It parses arguments and calls into the packages that hold the logic."""
