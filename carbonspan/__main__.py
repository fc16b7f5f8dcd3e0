from carbonspan.cli import main

raise SystemExit(main())
