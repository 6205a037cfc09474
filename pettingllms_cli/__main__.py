from pettingllms_cli.cli import main

main()
