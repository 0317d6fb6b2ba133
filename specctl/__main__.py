from specctl.orchestrator.cli.main import main

main()
