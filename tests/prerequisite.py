"""What a Python test does when a prerequisite is missing. One the project's
setup installs (podman and the images, the venv and its SDKs, root, LibTorch,
jupyter-console, the npm assets) skips on a developer's machine, but under
CI=true fails: a green CI run has run every such test. What a machine cannot
have (a GPU, a Modal token) keeps a plain unittest skip."""

import os
import unittest


def under_ci():
    return os.environ.get("CI") == "true"


def missing(reason):
    """Skips the test (or class) for reason; under CI=true fails instead."""
    if under_ci():
        raise AssertionError("a prerequisite the setup installs is missing under CI=true: " + reason)
    raise unittest.SkipTest(reason)


def requires(condition, reason):
    """unittest.skipUnless(condition, reason), except that under CI=true the test fails."""
    if condition or not under_ci():
        return unittest.skipUnless(condition, reason)

    def fail_instead(test):
        if isinstance(test, type):
            test.setUpClass = classmethod(lambda cls: missing(reason))
            return test
        return lambda *args, **kwargs: missing(reason)
    return fail_instead
