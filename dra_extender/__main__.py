from dra_extender.cli import main

raise SystemExit(main())
