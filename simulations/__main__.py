from simulations.cli import main

raise SystemExit(main())
