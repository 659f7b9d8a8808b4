"""`porter smoke`: ship the vime runtime to a host, run `python -m vime.smoke` there, keep the verdict.

bundle (what is shipped) -> runner (ship, run, collect, classify failures) -> diagnosis (KB matches
for failed steps) -> store (runs/<host>/<timestamp>/) -> compare / report (history)."""
