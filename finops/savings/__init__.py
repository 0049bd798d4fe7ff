"""What could be saved, from the ledger and the analyses: idle cost by waste reason, right-sizing, commitments
against on-demand, per-user nudges with their fix lines and MIG slices, and the monthly showback statement."""
