"""`python -m vime.quant describe CKPT_DIR` (see vime.quant.mxfp8.main)."""

from vime.quant.mxfp8 import main

raise SystemExit(main())
