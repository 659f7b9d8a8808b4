"""The upgrade fixtures (a plugin, an upstream at 1.0 and 2.0) and the smoke project, reused."""

from tests.upgrade.conftest import project as upgrade_project, trees, upstream_repo  # noqa: F401
from tests.smoke.conftest import local_tmp, project as smoke_project  # noqa: F401
