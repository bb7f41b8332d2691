from patchkit.cli.main import main

main()
