"""The device check's arithmetic and summary, which a GPU run reads once and cannot redo: the bytes a
decode step reads (tests/bench/decode_limit.py), its targets, and summarize.py's summary of a run cut
off after some steps, and of a step skipped (split_2gpu on one GPU). Run by ctest (device_summary) in build/venv's Python."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))

import decode_limit  # noqa: E402


def checkpoint(directory, tensors):
    """A safetensors checkpoint of zeros of the given {name: (shape, numpy dtype)}, split over two files."""
    os.makedirs(directory)
    names = sorted(tensors)
    for number, part in enumerate((names[::2], names[1::2])):
        save_file({n: np.zeros(tensors[n][0], dtype=tensors[n][1]) for n in part},
                  os.path.join(directory, "model-%d.safetensors" % number))
    return directory


class BytesPerStep(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="decode-limit-")
        self.addCleanup(shutil.rmtree, self.work)

    def test_untied_embedding_is_read_one_row_per_token(self):
        d = checkpoint(os.path.join(self.work, "untied"), {
            "model.embed_tokens.weight": ((1000, 64), np.float32), "lm_head.weight": ((1000, 64), np.float32),
            "model.layers.0.mlp.up_proj.weight": ((128, 64), np.float32), "model.norm.weight": ((64,), np.float32)})
        got = decode_limit.bytes_per_step(d)
        total = 4 * (1000 * 64 * 2 + 128 * 64 + 64)
        self.assertEqual(got, {"weight_bytes": total, "read_bytes": total - 4 * 999 * 64, "tied": False})
        # In bfloat16 as modeld holds it: every floating-point tensor at 2 bytes.
        self.assertEqual(decode_limit.bytes_per_step(d, "bfloat16")["read_bytes"], (total - 4 * 999 * 64) // 2)

    def test_tied_table_counts_once_whole_and_positions_one_row(self):
        d = checkpoint(os.path.join(self.work, "gpt2"), {
            "transformer.wte.weight": ((500, 32), np.float16), "transformer.wpe.weight": ((256, 32), np.float16),
            "transformer.h.0.mlp.c_fc.weight": ((32, 128), np.float16)})
        got = decode_limit.bytes_per_step(d)
        self.assertTrue(got["tied"])
        self.assertEqual(got["weight_bytes"], 2 * (500 * 32 + 256 * 32 + 32 * 128))
        self.assertEqual(got["read_bytes"], 2 * (500 * 32 + 32 + 32 * 128))

    def test_a_folder_without_safetensors_is_refused(self):
        with self.assertRaisesRegex(ValueError, "no .safetensors file"):
            decode_limit.bytes_per_step(self.work)


class Verdicts(unittest.TestCase):
    def test_each_target_met_or_not(self):
        rows = decode_limit.verdicts({"dynamic": 5.0, "fixed": 4.9, "graph": 4.0}, 3.0, 16.0)
        self.assertEqual([met for *_, met in rows], [True, True, True])  # 75 %, graph <= 4.9, 4x
        rows = decode_limit.verdicts({"dynamic": 5.0, "fixed": 4.0, "graph": 4.1}, 2.9, None)
        self.assertEqual([met for *_, met in rows], [False, False, None])  # 72.5 % of the limit by fixed steps
        self.assertIn("(fixed steps)", rows[0][0])
        text = decode_limit.verdict_text(rows)
        self.assertIn("NOT met", text)
        self.assertIn("not measured", text)


class Summary(unittest.TestCase):
    def test_a_run_cut_off_names_the_steps_not_reached_and_sets_figures_side_by_side(self):
        work = tempfile.mkdtemp(prefix="summary-")
        self.addCleanup(shutil.rmtree, work)
        os.makedirs(os.path.join(work, "figures"))
        with open(os.path.join(work, "steps.tsv"), "w") as f:
            f.write("setup\tpass\t3.0\t0\t\ndecode_8b\tpass\t50.0\t0\t\ntransformers_8b\tfail\t20.0\t1\t\n")
        bench = {"model": "llama-8b", "device": "cuda", "dtype": "bfloat16", "held_dtype": "bfloat16", "layers": 32,
                 "read_bytes": 15e9, "bandwidth": 3e12, "limit_ms": 5.0, "graph_equal": True,
                 "ms": {"dynamic": 7.0, "fixed": 7.0, "graph": 6.0}, "gpu": {}}
        with open(os.path.join(work, "figures", "decode_8b.json"), "w") as f:
            json.dump(bench, f)
        with open(os.path.join(work, "figures", "transformers_8b.json"), "w") as f:
            json.dump({"transformers": "5.17.0", "decode_ms": 30.0, "load_s": 9.0}, f)
        out = os.path.join(work, "out")
        run = subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), "--steps", os.path.join(work, "steps.tsv"),
                              "--figures", os.path.join(work, "figures"), "--mode", "cuda", "--seconds", "73",
                              "--carry", work, "--out", out, "--planned", "setup decode_8b transformers_8b sae_bench"])
        self.assertEqual(run.returncode, 1)  # one failed, one not reached
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual([s["step"] for s in summary["steps"]], ["setup", "decode_8b", "transformers_8b", "sae_bench"])
        self.assertEqual((summary["passed"], summary["failed"], summary["not_run"]), (2, 1, 1))
        self.assertEqual(summary["steps"][3]["note"], "not reached")
        line = summary["steps"][1]["key_figures"]
        self.assertIn("of the limit (graph steps) 83 % (target >= 75 % (moonshot 85 %): met)", line)
        self.assertIn("over transformers eager 5.00x (target >= 4x: met)", line)  # the later step's figure
        self.assertIn("graph = fixed tokens: pass", line)
        self.assertEqual(sorted(os.listdir(out)), ["summary.json", "summary.txt"])  # no .partial left

    def test_a_skipped_step_does_not_fail_the_run_and_keeps_its_one_line(self):
        """split_2gpu on a machine with one GPU: run.sh records its exit 77 as skipped; the summary shows the
        step's one line, counts it apart, and exits 0; split figures from a 2-GPU run are summarized."""
        work = tempfile.mkdtemp(prefix="summary-")
        self.addCleanup(shutil.rmtree, work)
        os.makedirs(os.path.join(work, "figures"))
        os.makedirs(os.path.join(work, "logs"))
        with open(os.path.join(work, "logs", "split_2gpu.log"), "w") as f:
            f.write("split_2gpu: this machine has 1 GPU; a split needs 2\n")
        with open(os.path.join(work, "steps.tsv"), "w") as f:
            f.write("setup\tpass\t3.0\t0\t\nsplit_2gpu\tskipped\t2.1\t77\t\n")
        out = os.path.join(work, "out")

        def summarize():
            run = subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), "--steps",
                                  os.path.join(work, "steps.tsv"), "--figures", os.path.join(work, "figures"), "--mode",
                                  "cuda", "--seconds", "5", "--carry", work, "--out", out, "--planned", "setup split_2gpu"])
            with open(os.path.join(out, "summary.json")) as f:
                summary = json.load(f)
            with open(os.path.join(out, "summary.txt")) as f:
                return run.returncode, summary, f.read()

        code, summary, text = summarize()
        self.assertEqual(code, 0)
        self.assertEqual((summary["passed"], summary["skipped"], summary["failed"], summary["not_run"]), (1, 1, 0, 0))
        self.assertEqual(summary["steps"][1]["key_figures"], "split_2gpu: this machine has 1 GPU; a split needs 2")
        self.assertIn("1 passed, 1 skipped, 0 failed, 0 not run", text)

        with open(os.path.join(work, "steps.tsv"), "w") as f:
            f.write("setup\tpass\t3.0\t0\t\nsplit_2gpu\tpass\t25.0\t0\t\n")
        with open(os.path.join(work, "figures", "split_2gpu.json"), "w") as f:
            json.dump({"float32": {"logits_relative_error": 3e-7, "bound": 1e-5, "greedy_agree": 12, "greedy_tokens": 12},
                       "bfloat16": {"logits_relative_error": 8e-3, "bound": 3e-2, "greedy_agree": 9, "greedy_tokens": 12},
                       "decode": {"per_layer_us": {"one": 100.0, "split": 140.0}, "split_adds_per_layer_us": 40.0},
                       "allreduce_us": {"1024": 14.5, "8192": None}}, f)
        code, summary, _ = summarize()
        self.assertEqual(code, 0)
        self.assertEqual(summary["steps"][1]["key_figures"],
                         "float32 3.0e-07 (bound 1e-05), greedy 12/12; bfloat16 8.0e-03 (bound 3e-02), greedy 9/12; "
                         "per layer one 100.0 us, split 140.0 us: +40.0 us; all-reduce of 1024: 14.5 us; "
                         "all-reduce of 8192: not measured")


if __name__ == "__main__":
    unittest.main()
