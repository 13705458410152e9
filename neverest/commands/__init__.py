"""The commands of neverestctl, by concept; the parser that maps onto them is neverest/ctl.py."""
