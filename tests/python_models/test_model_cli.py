"""`gpubox model ID ...` (host/cli/model.cpp), the real CLI against a real local
sandbox (`gpubox create --config` with a model_host section) whose agent runs the
real gpubox-modeld: ls, info, tokenize, generate token-equal to transformers,
--stream printing as tokens arrive, the progress bar and wait while a model
loads, a model that fails to load, an unknown model and bad flags."""

import json
import os
import pty
import select
import shutil
import subprocess
import unittest

from model_harness import CLI, ModelSandboxTestCase


class ModelCliTest(ModelSandboxTestCase):
    def model(self, *args, **kwargs):
        return self.gpubox("model", self.id, *args, **kwargs)

    def ok(self, *args):
        run = self.model(*args)
        self.assertEqual(run.returncode, 0, run.stderr)
        return run

    def test_ls_info_tokenize(self):
        self.ok("info", "tiny")  # waits until it is ready
        listing = self.ok("ls").stdout
        self.assertRegex(listing, r"tiny\s+ready\s+llama")
        info = json.loads(self.ok("info", "tiny", "--json").stdout)
        self.assertEqual(info["architecture"], "llama")
        self.assertEqual(info["vocab_size"], 320)
        self.assertIn("context_length:", self.ok("info", "tiny").stdout)
        hooks = self.ok("hooks", "tiny").stdout.splitlines()
        self.assertRegex(hooks[0], r"^hook_embed\s+\[batch, pos, 64\]$")
        self.assertTrue(any(line.split()[0] == "blocks.1.attn.hook_q" and line.endswith("[batch, pos, 4, 16]") for line in hooks))
        self.assertEqual(hooks[-1], "%d hook points" % info["hook_points"])
        self.assertEqual(len(hooks) - 1, info["hook_points"])
        self.assertEqual([h["name"] for h in json.loads(self.ok("hooks", "tiny", "--json").stdout)][-1], "logits")
        info_text = self.ok("info", "tiny").stdout
        self.assertIn("(gpubox model ID hooks tiny lists them)", info_text)
        kv_cache = json.loads(self.ok("info", "tiny", "--json").stdout)["kv_cache"]
        self.assertIn("kv_cache:            %d tokens (" % kv_cache["tokens"], info_text)
        missing = self.model("hooks", "nope")
        self.assertEqual(missing.returncode, 2, missing.stderr)
        self.assertEqual(self.ok("tokenize", "tiny", "Hello").stdout, "72 101 108 108 111\n")

    def test_stats_show_the_batch_and_its_kv_cache(self):
        self.ok("generate", "tiny", "--ids", "1,2,3", "--max-new-tokens", "4", "--ignore-eos")
        stats = json.loads(self.ok("stats", "tiny", "--json").stdout)
        batching, kv = stats["batching"], stats["batching"]["kv"]
        self.assertGreaterEqual(batching["requests_done"], 1)
        self.assertEqual(kv["blocks_used"], 0)
        text = self.ok("stats", "tiny").stdout
        self.assertIn("queue:       0 waiting (max_queue 256)", text)
        self.assertIn("kv cache:    0 of %d blocks used (16 positions each;" % kv["blocks"], text)
        self.assertIn("cuda graphs: 0 captured, 0 reused", text)  # the CPU has none
        self.assertRegex(text, r"batch:\s+0 requests, 0 rows \(max_batch 32; peak [1-9]\d* rows in one step\)")

    def test_generate_equals_transformers_greedy(self):
        ids = ",".join(str(i) for i in self.refs["generate_ids"])
        out = json.loads(self.ok("generate", "tiny", "--ids", ids, "--max-new-tokens", str(self.refs["new_tokens"]),
                                 "--ignore-eos", "--json").stdout)
        self.assertEqual(out["tokens"], self.refs["greedy"])
        text = self.ok("generate", "tiny", "Hel", "--max-new-tokens", "4", "--ignore-eos")
        self.assertEqual(text.stderr, "finish_reason: length\n")
        streamed = self.ok("generate", "tiny", "Hel", "--max-new-tokens", "4", "--ignore-eos", "--stream")
        self.assertEqual(streamed.stdout, text.stdout)
        long = ",".join(str(3 + i % 300) for i in range(250))  # 250 of the tiny Llama's 256 positions
        cut = self.ok("generate", "tiny", "--ids", long, "--max-new-tokens", "20", "--ignore-eos")
        self.assertEqual(cut.stderr, "finish_reason: length\nmax_new_tokens 20 cut to 6: the prompt and the new tokens "
                                     "fill the model's context of 256 tokens\n")

    def test_stream_prints_as_tokens_arrive(self):
        self.ok("load", "streamer", self.refs["big"], "--wait")
        process = subprocess.Popen([CLI, "model", self.id, "generate", "streamer", "--ids", "1,2,3", "--max-new-tokens",
                                    "120", "--ignore-eos", "--stream"], env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        try:
            first = process.stdout.read1(64)
            self.assertTrue(first)
            self.assertIsNone(process.poll(), "the first token should be printed before generation ends")
            rest = process.stdout.read()
            self.assertEqual(process.wait(timeout=120), 0, process.stderr.read())
            self.assertEqual(len((first + rest).split()), 120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
            process.stderr.close()
            self.model("unload", "streamer")

    def test_load_shows_progress_then_waits(self):
        # stderr on a terminal: the bar of bytes loaded; stdout says when it is ready.
        leader, follower = pty.openpty()
        try:
            process = subprocess.Popen([CLI, "model", self.id, "load", "big", self.refs["big"], "--dtype", "float32",
                                        "--wait"], env=self.env, stdout=subprocess.PIPE, stderr=follower)
            os.close(follower)
            drawn = b""
            while True:
                readable, _, _ = select.select([leader], [], [], 120)
                if not readable:
                    break
                try:
                    chunk = os.read(leader, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                drawn += chunk
            self.assertEqual(process.wait(timeout=120), 0, drawn)
            self.assertEqual(process.stdout.read(), b"big: ready\n")
            process.stdout.close()
        finally:
            os.close(leader)
        self.assertIn(b"loading big [", drawn)
        self.assertIn(b"100%", drawn)
        info = json.loads(self.ok("info", "big", "--json").stdout)
        self.assertEqual(info["dtype"], "float32")
        self.ok("unload", "big")

    def test_a_model_that_fails_to_load_fails_clearly(self):
        broken = os.path.join(self.scratch, "broken")
        os.makedirs(broken, exist_ok=True)
        shutil.copy(os.path.join(self.refs["llama"], "config.json"), broken)
        with open(os.path.join(broken, "model.safetensors"), "wb") as f:
            f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"truncated")  # a header longer than the file
        self.ok("load", "broken", broken)
        run = self.model("info", "broken")
        self.assertEqual(run.returncode, 1)
        self.assertIn("model 'broken' failed to load", run.stderr)
        self.model("unload", "broken")
        # A path the sandbox does not see (a host path never mounted) says what to do.
        run = self.model("load", "elsewhere", "/root/not-mounted-model", "--wait")
        self.assertEqual(run.returncode, 1, run.stderr)
        self.assertIn("/root/not-mounted-model/config.json: cannot be read", run.stderr)
        self.assertIn("must be mounted: gpubox create --mount HOST:SANDBOX[:ro]", run.stderr)
        self.model("unload", "elsewhere")
        # So does an SAE's.
        run = self.model("sae", "load", "tiny", "far", "/root/not-mounted-sae")
        self.assertEqual(run.returncode, 2, run.stderr)  # not_found
        self.assertIn("/root/not-mounted-sae/cfg.json: cannot be read", run.stderr)
        self.assertIn("must be mounted: gpubox create --mount HOST:SANDBOX[:ro]", run.stderr)

    def test_a_failed_load_is_replaced_by_a_new_load(self):
        broken = os.path.join(self.scratch, "broken-then-fixed")
        os.makedirs(broken, exist_ok=True)
        shutil.copy(os.path.join(self.refs["llama"], "config.json"), broken)
        with open(os.path.join(broken, "model.safetensors"), "wb") as f:
            f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"truncated")
        failed = self.model("load", "retry", broken, "--wait")
        self.assertEqual(failed.returncode, 1, failed.stderr)
        self.assertIn("model 'retry' failed to load", failed.stderr)
        # Loading it again, from a good path, takes the failed one's place (no unload first).
        self.ok("load", "retry", self.refs["llama"], "--wait")
        self.assertRegex(self.ok("ls").stdout, r"retry\s+ready\s+llama")
        again = self.model("load", "retry", self.refs["llama"])  # a ready model is still not replaced
        self.assertEqual(again.returncode, 1, again.stderr)
        self.assertIn("is already ready; unload it first", again.stderr)
        self.ok("unload", "retry")

    def test_create_fails_for_a_model_that_cannot_load(self):
        config = os.path.join(self.scratch, "missing-model.json")
        with open(config, "w") as f:
            json.dump({"model_host": {"models": [{"name": "ghost", "path": "/no/such/model"}]},
                       "kernel": {"enabled": False}}, f)
        before = self.gpubox("ls", "--json").stdout
        failed = self.gpubox("create", "--config", config)
        self.assertEqual(failed.returncode, 1, failed.stderr)
        self.assertIn("model 'ghost' failed to load", failed.stderr)
        self.assertIn("/no/such/model", failed.stderr)
        self.assertIn("--mount HOST:SANDBOX", failed.stderr)
        self.assertEqual(self.gpubox("ls", "--json").stdout, before, "the sandbox was not ended")
        # A model host that cannot start (here: a binary that exits at once) fails the create too.
        crashing = os.path.join(self.scratch, "crashing-host.json")
        with open(crashing, "w") as f:
            json.dump({"model_host": {"binary": "/bin/false", "models": [{"name": "tiny", "path": self.refs["llama"]}]},
                       "kernel": {"enabled": False}}, f)
        failed = self.gpubox("create", "--config", crashing)
        self.assertEqual(failed.returncode, 1, failed.stderr)
        self.assertIn("the model host keeps exiting as it starts", failed.stderr)
        self.assertIn("last exit: exited with code 1", failed.stderr)
        self.assertEqual(self.gpubox("ls", "--json").stdout, before)
        kept = self.gpubox("create", "--config", config, "--models-optional")
        self.assertEqual(kept.returncode, 0, kept.stderr)
        try:
            listing = self.gpubox("model", kept.stdout.strip(), "ls").stdout
            self.assertRegex(listing, r"ghost\s+failed")
        finally:
            self.gpubox("terminate", kept.stdout.strip())

    def test_unknown_model_and_bad_usage(self):
        run = self.model("info", "nope")
        self.assertEqual(run.returncode, 2)
        self.assertIn("no model named 'nope'", run.stderr)
        run = self.model("generate", "nope", "hi")
        self.assertEqual(run.returncode, 2)
        self.assertIn("not_found", run.stderr)
        run = self.model("unload", "nope")
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("(`gpubox model %s ls` shows the loaded ones)" % self.id, run.stderr)
        # Refusals in the CLI's words: the command to use, never the RPC method or params.ops[0].
        run = self.model("run", "tiny", "Hi", "--capture", "blocks.0.resid_post")
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("op [0].hook", run.stderr)
        self.assertIn("blocks.0.hook_resid_post", run.stderr)
        self.assertIn("`gpubox model %s hooks MODEL` lists them" % self.id, run.stderr)
        for rpc_words in ("params.", "model.hooks lists", "model.list shows"):
            self.assertNotIn(rpc_words, run.stderr)
        for args in (["generate", "tiny", "hi", "--max-new-tokens", "many"], ["generate", "tiny", "hi", "--top-p", "2"],
                     ["generate", "tiny", "hi", "--bogus"], ["frobnicate"], ["tokenize", "tiny"],
                     ["generate", "tiny", "--ids", "1,x"]):
            run = self.model(*args)
            self.assertEqual(run.returncode, 2, (args, run.stderr))
            self.assertIn("See 'gpubox model --help'.", run.stderr)
            self.assertNotIn("usage:", run.stderr)
        # Ranges as people write them: integers without a decimal point.
        for flag, value, said in (("--max-new-tokens", "-1", "expected an integer from 0 to 1048576"),
                                  ("--top-p", "2", "expected a number from 0 to 1")):
            run = self.model("generate", "tiny", "hi", flag, value)
            self.assertIn("%s '%s': %s" % (flag, value, said), run.stderr)
        json_error = json.loads(self.model("info", "nope", "--json").stdout)
        self.assertEqual(json_error["error"]["code"], "not_found")


if __name__ == "__main__":
    unittest.main()
