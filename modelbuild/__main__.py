from modelbuild.cli import main

raise SystemExit(main())
