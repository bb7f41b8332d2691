from patchkit.cli.start import main

main()
