from service.cli import entry

entry()
