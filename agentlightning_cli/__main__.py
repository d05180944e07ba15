from agentlightning_cli.cli import main

main()
