from posttrain.cli import main

main()
