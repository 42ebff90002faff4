from aap.cli.main import main

main()
