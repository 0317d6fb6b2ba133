from specctl.orchestrator.cli import main

main()
