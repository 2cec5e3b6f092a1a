"""Functions and SAEs survive a modeld restart, as models do: a real gpubox-modeld is
killed by its pid (SIGKILL, as a crash) and started again on the files it left
(modeld.json and modeld.json.loaded/), as the agent's supervisor restarts it.

Interpreter: build/venv/bin/python; one tiny random GPT-2 (tiny_models.py) and
SAEs in SAELens' format (saelens_format.py). The comparisons are exact: the same
binary runs the same float32 arithmetic on the same weights before and after,
so a function or SAE that came back as anything else (another archive, another
SAE, a lost op) shows as a difference. Damaged files (a truncated archive,
loaded.json that is not JSON) are logged naming the file and dropped; modeld
still starts and serves.
"""
import hashlib
import os
import shutil
import stat
import tempfile
import unittest
import warnings

import numpy as np
import torch

import tiny_models
from gpubox.client import RpcError
from gpubox.models import Model
from gpubox.user_fn import archive
from modeld_process import Modeld
from saelens_format import make_sae

os.environ["HF_HUB_OFFLINE"] = "1"
warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's (hooks/README.md, "fn")

PROMPT = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
HOOK = "blocks.1.hook_resid_post"
SESSION_A = "session-a-" + "0123456789abcdef" * 2
SESSION_B = "session-b-" + "fedcba9876543210" * 2


def double(act: torch.Tensor) -> torch.Tensor:
    return act * 2.0


def triple(act: torch.Tensor) -> torch.Tensor:
    return act * 3.0


def halve(act: torch.Tensor) -> torch.Tensor:
    return act * 0.5


def negate(act: torch.Tensor) -> torch.Tensor:
    return -act


def content_name(fn):
    return "sha256:" + hashlib.sha256(archive(fn)).hexdigest()


class ModeldPersist(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="modeld-persist-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.model_path, _ = tiny_models.make(self.dir, "gpt2", seed=80)
        saes = os.path.join(self.dir, "saes")
        self.sae_paths = {name: make_sae(saes, name, 64, hook=hook, seed=91 + i)[0] for i, (name, hook) in
                          enumerate([("std", HOOK), ("runtime", "blocks.0.hook_resid_post"), ("gone", HOOK),
                                     ("spec_gone", "blocks.2.hook_resid_post")])}
        entry = {"name": "gpt2", "path": self.model_path, "saes": [{"name": "std", "path": self.sae_paths["std"]},
                                                        {"name": "spec_gone", "path": self.sae_paths["spec_gone"]}]}
        self.modeld = Modeld([entry], os.path.join(self.dir, "run"))
        self.addCleanup(self.modeld.close)
        self.modeld.wait_all_ready()
        self.kept = self.modeld.config + ".loaded"

    def model(self, session):
        """gpt2 as a caller of session sees it (its fn ops send session)."""
        self.modeld.client.__dict__["_gpubox_fn_session"] = session
        return Model(self.modeld.client, "gpt2")

    def fn_load(self, name, fn, session, shared=False):
        params = {"model": "gpt2", "name": name, "shared": shared}
        if session:
            params["session"] = session
        return self.modeld.client.call("model.fn_load", params=params, attachments=[archive(fn)])

    def fns(self, session):
        params = {"model": "gpt2"}
        if session:
            params["session"] = session
        return sorted((f["name"], f["sha256"], f["scope"]) for f in self.modeld.client.call("model.fns", **params)["fns"])

    def saes(self):
        return sorted((s["name"], s["hook"], s["d_sae"]) for s in self.modeld.client.call("model.saes", model="gpt2")["saes"])

    def with_fn(self, session, name):
        return self.model(session).run(ids=PROMPT, ops=[{"op": "fn", "hook": HOOK, "fn": name}])["logits"].numpy()

    def with_saes(self):
        result = self.model("").run(ids=PROMPT, ops=[{"op": "sae_capture", "sae": "runtime"},
                                                     {"op": "sae_steer", "sae": "std", "features": [1, 7], "scale": 4.0}])
        return result["logits"].numpy(), result["sae:runtime"].numpy()

    def restart(self):
        """Kills modeld by pid and starts it on the same files; returns what it logged since."""
        log_before = len(self.modeld.log_text())
        pid = self.modeld.process.pid
        self.modeld.kill()
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)
        self.modeld.start()
        status = self.modeld.wait_all_ready()
        self.assertEqual([m["name"] for m in status["models"]], ["gpt2"])  # listed from the first call on
        return self.modeld.log_text()[log_before:]

    def test_functions_and_saes_come_back_by_name_session_and_content_and_unloaded_ones_stay_unloaded(self):
        self.fn_load("double", double, SESSION_A)
        self.fn_load("triple", triple, SESSION_B, shared=True)
        self.fn_load(content_name(halve), halve, SESSION_A)
        self.fn_load(content_name(halve), halve, None)  # a second holder: calls without a session
        self.fn_load("gone", negate, SESSION_A)
        self.modeld.client.call("model.fn_unload", model="gpt2", name="gone", session=SESSION_A)
        for name in ("runtime", "gone"):
            self.modeld.client.call("model.sae_load", model="gpt2", name=name, path=self.sae_paths[name])
        for name in ("gone", "spec_gone"):  # one loaded at run time, one of modeld.json's entry
            self.modeld.client.call("model.sae_unload", model="gpt2", sae=name)
        listed = {session: self.fns(session) for session in (SESSION_A, SESSION_B, None)}
        self.assertEqual(listed[SESSION_A], sorted([("double", hashlib.sha256(archive(double)).hexdigest(), "session"),
                                                    (content_name(halve), content_name(halve)[7:], "content"),
                                                    ("triple", hashlib.sha256(archive(triple)).hexdigest(), "shared")]))
        saes = self.saes()
        self.assertEqual([s[0] for s in saes], ["runtime", "std"])
        before = {"double": self.with_fn(SESSION_A, "double"), "triple": self.with_fn(SESSION_A, "triple"),
                  "halve": self.with_fn(None, content_name(halve))}
        before_saes = self.with_saes()
        plain = self.model("").run(ids=PROMPT)["logits"].numpy()

        log = self.restart()

        self.assertEqual({session: self.fns(session) for session in (SESSION_A, SESSION_B, None)}, listed, log)
        self.assertEqual(self.saes(), saes, log)
        for name, logits in before.items():
            fn_name = content_name(halve) if name == "halve" else name
            np.testing.assert_array_equal(self.with_fn(None if name == "halve" else SESSION_A, fn_name), logits, err_msg=name)
        self.assertFalse(np.array_equal(before["double"], plain))  # the functions do change the logits
        after_saes = self.with_saes()
        np.testing.assert_array_equal(after_saes[0], before_saes[0])
        np.testing.assert_array_equal(after_saes[1], before_saes[1])
        with self.assertRaises(RpcError) as caught:
            self.with_fn(SESSION_A, "gone")
        self.assertEqual(caught.exception.code, "invalid_request")
        self.assertIn('no function "gone"', caught.exception.message)
        with self.assertRaises(RpcError) as caught:  # still its owner's (SESSION_B's) alone to unload
            self.modeld.client.call("model.fn_unload", model="gpt2", name="triple", session=SESSION_A)
        self.assertEqual(caught.exception.code, "permission_denied")
        # Session secrets rest only in modeld's private files.
        self.assertEqual(stat.S_IMODE(os.stat(self.kept).st_mode), 0o700)
        for name in os.listdir(self.kept):
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.kept, name)).st_mode), 0o600, name)
        self.assertEqual(sorted(os.listdir(self.kept)), sorted(
            ["loaded.json"] + [hashlib.sha256(archive(fn)).hexdigest() + ".pt" for fn in (double, triple, halve)]))

        # An unload after the restart holds across the next one; the content name keeps its other holder.
        self.modeld.client.call("model.fn_unload", model="gpt2", name="double", session=SESSION_A)
        self.modeld.client.call("model.fn_unload", model="gpt2", name=content_name(halve), session=SESSION_A)
        self.modeld.client.call("model.sae_unload", model="gpt2", sae="runtime")
        log = self.restart()
        self.assertEqual(self.fns(SESSION_A), [("triple", hashlib.sha256(archive(triple)).hexdigest(), "shared")], log)
        self.assertEqual([f[0] for f in self.fns(None)], sorted([content_name(halve), "triple"]))
        self.assertEqual([s[0] for s in self.saes()], ["std"])
        self.assertNotIn(hashlib.sha256(archive(double)).hexdigest() + ".pt", os.listdir(self.kept))

    def test_an_unloaded_model_takes_its_functions_and_saes_with_it(self):
        self.fn_load("double", double, SESSION_A)
        self.modeld.client.call("model.sae_load", model="gpt2", name="runtime", path=self.sae_paths["runtime"])
        self.modeld.client.call("model.unload", model="gpt2")
        self.assertEqual(os.listdir(self.kept), ["loaded.json"])
        self.modeld.client.call("model.load", name="gpt2", path=self.model_path)
        self.modeld.wait_all_ready()
        self.assertEqual(self.fns(SESSION_A), [])
        self.assertEqual([s[0] for s in self.saes()], [])

    def test_a_truncated_archive_is_logged_naming_it_and_dropped_and_the_model_serves(self):
        self.fn_load("double", double, SESSION_A)
        self.fn_load("halve", halve, SESSION_A)
        doubled = self.with_fn(SESSION_A, "double")
        damaged = os.path.join(self.kept, hashlib.sha256(archive(halve)).hexdigest() + ".pt")
        with open(damaged, "r+b") as f:
            f.truncate(100)
        log = self.restart()
        self.assertIn('model "gpt2": function "halve" (sha256:%s) is not loaded again after the restart and is dropped: '
                      "%s: damaged: its 100 bytes hash to sha256:" % (hashlib.sha256(archive(halve)).hexdigest(), damaged), log)
        self.assertEqual([f[0] for f in self.fns(SESSION_A)], ["double"])
        np.testing.assert_array_equal(self.with_fn(SESSION_A, "double"), doubled)
        self.assertFalse(os.path.exists(damaged))  # dropped for good: the next restart does not try it again
        self.assertNotIn("halve", self.restart())

    def test_a_loaded_json_that_is_not_json_is_logged_naming_it_and_dropped_and_modeld_serves(self):
        self.fn_load("double", double, SESSION_A)
        self.modeld.client.call("model.sae_load", model="gpt2", name="runtime", path=self.sae_paths["runtime"])
        plain = self.model("").run(ids=PROMPT)["logits"].numpy()
        with open(os.path.join(self.kept, "loaded.json"), "w") as f:
            f.write('{"models": {"gpt2": {"fns": [')
        log = self.restart()
        self.assertIn("%s/loaded.json: damaged (not a JSON object {\"models\": {...}}); the functions and SAEs it kept are "
                      "dropped" % self.kept, log)
        self.assertEqual(self.fns(SESSION_A), [])
        self.assertEqual([s[0] for s in self.saes()], ["spec_gone", "std"])  # modeld.json's entry as it is
        np.testing.assert_array_equal(self.model("").run(ids=PROMPT)["logits"].numpy(), plain)
        self.fn_load("double", double, SESSION_A)  # and the file is whole again
        self.assertNotIn("damaged", self.restart())
        self.assertEqual([f[0] for f in self.fns(SESSION_A)], ["double"])


if __name__ == "__main__":
    unittest.main()
