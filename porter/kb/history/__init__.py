"""Already fixed upstream?": candidate fix commits for a trace, from a plugin's own git history.

frames.py pulls the causal traceback's plugin frames; mine.py reads commits (a cached per-commit
index, or `git log` on the frames' files); version.py finds the installed version; candidates.py
ranks the commits after it; raise_site.py finds where the plugin prints a frame-less trace's
error, release_line.py the installed version's release branch. models.py holds the records.
"""
