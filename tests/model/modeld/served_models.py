"""ServedTinyModels: a test class whose tiny random models (tiny_models.py) one
gpubox-modeld serves for all its tests."""
import os
import shutil
import tempfile
import unittest

import tiny_models
from modeld_process import Modeld


class ServedTinyModels(unittest.TestCase):
    """setUpClass makes ARCHITECTURES (seeds SEED, SEED+1, ...) into cls.models
    ({name: (path, transformers model)}) and serves them, and extra_models()'
    entries, from cls.modeld; tearDownClass ends it and removes the files."""
    ARCHITECTURES = ()
    SEED = 0

    @classmethod
    def extra_models(cls):
        """More modeld.json entries, made in cls.dir."""
        return []

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="modeld-%s-" % cls.__name__.lower())
        cls.models = {name: tiny_models.make(cls.dir, name, seed=cls.SEED + i) for i, name in enumerate(cls.ARCHITECTURES)}
        entries = [{"name": n, "path": p} for n, (p, _) in cls.models.items()] + cls.extra_models()
        cls.modeld = Modeld(entries, os.path.join(cls.dir, "run"))
        cls.modeld.wait_all_ready()

    @classmethod
    def tearDownClass(cls):
        cls.modeld.close()
        shutil.rmtree(cls.dir, ignore_errors=True)
