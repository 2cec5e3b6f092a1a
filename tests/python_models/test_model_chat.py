"""model.chat_template and generate(messages=...) through the real agent and
the real gpubox-modeld (Debian's python3 as the client): a copy of the fixture's
tiny Llama with a tokenizer_config.json chat template (tools as tojson, a
raise_exception) renders byte-equal with transformers' apply_chat_template (the
venv's, run as a subprocess) with equal ids; generate(messages) gives the tokens
generate(ids=those ids) gives; a model without a template, a template error and
malformed messages are clear errors; `gpubox model ID generate --chat` works."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_harness import AGENT, CLI, FIXTURE, MODELD, VENV_PYTHON, Agent, fixture, missing  # noqa: E402
import gpubox  # noqa: E402

TEMPLATE = (
    "{{ bos_token }}{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n{% endif %}"
    "{%- for m in messages %}\n"
    "  {%- if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('unknown role ' + m.role) }}{% endif %}\n"
    "  {{- '[' + m.role | upper + '] ' + m.content | trim }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}\n"
    "{% endfor %}\n"
    "{%- if add_generation_prompt %}[ASSISTANT]{% endif %}")

TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello there "}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Grüße"}],
]

REFERENCE = r"""
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = []
for case in json.loads(sys.stdin.read()):
    kw = dict(tools=case.get("tools"), add_generation_prompt=case["agp"])
    text = tok.apply_chat_template(case["messages"], tokenize=False, **kw)
    ids = tok.apply_chat_template(case["messages"], tokenize=True, return_dict=False, **kw)
    out.append({"text": text, "ids": list(ids)})
print(json.dumps(out))
"""


class ModelChatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(MODELD):
            missing("no gpubox-modeld at %s (built only with the venv's torch)" % MODELD)
        refs = fixture()
        cls.dir = tempfile.mkdtemp(prefix="chat-", dir=FIXTURE)
        for name in os.listdir(refs["llama"]):
            shutil.copy(os.path.join(refs["llama"], name), cls.dir)
        with open(os.path.join(cls.dir, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<s>", "eos_token": "</s>", "chat_template": TEMPLATE}, f)
        cls.bad = tempfile.mkdtemp(prefix="chat-bad-", dir=FIXTURE)
        for name in os.listdir(refs["llama"]):
            shutil.copy(os.path.join(refs["llama"], name), cls.bad)
        with open(os.path.join(cls.bad, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": "{% for m in messages %}{% include 'x' %}{% endfor %}"}, f)
        config = {"model_host": {"binary": MODELD, "models": [{"name": "chat", "path": cls.dir}, {"name": "plain", "path": refs["llama"]},
                                                              {"name": "bad", "path": cls.bad}]},
                  "kernel": {"enabled": False}}
        cls.agent = Agent(config=config)
        cls.client = gpubox.Client(cls.agent.ipc)
        for name in ("chat", "plain", "bad"):
            cls.client.model(name).wait_ready(timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.agent.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        shutil.rmtree(cls.bad, ignore_errors=True)

    def reference(self, cases):
        done = subprocess.run([VENV_PYTHON, "-c", REFERENCE, self.dir], input=json.dumps(cases), capture_output=True,
                              text=True, timeout=300, check=True)
        return json.loads(done.stdout)

    def test_renders_like_transformers(self):
        cases = [{"messages": m, "agp": agp, **({"tools": TOOLS} if tools else {})}
                 for m in CONVERSATIONS for agp in (False, True) for tools in (False, True)]
        want = self.reference(cases)
        model = self.client.model("chat")
        for case, ref in zip(cases, want):
            got = model.chat_template(case["messages"], add_generation_prompt=case["agp"], tools=case.get("tools"))
            self.assertEqual(got["text"], ref["text"], case)
            self.assertEqual(got["ids"], ref["ids"], case)
        batch = model.chat_template(CONVERSATIONS, add_generation_prompt=True)
        self.assertEqual(batch["text"], [want[2]["text"], want[6]["text"]])  # add_generation_prompt, no tools
        self.assertEqual(batch["ids"], [want[2]["ids"], want[6]["ids"]])

    def test_generate_with_messages_is_generate_with_the_rendered_ids(self):
        model = self.client.model("chat")
        ids = model.chat_template(CONVERSATIONS[1], add_generation_prompt=True)["ids"]
        by_messages = model.generate(messages=CONVERSATIONS[1], max_new_tokens=6, ignore_eos=True)
        by_ids = model.generate(ids, max_new_tokens=6, ignore_eos=True)
        self.assertEqual(by_messages["tokens"], by_ids["tokens"])
        self.assertEqual(by_messages["prompt_tokens"], len(ids))
        batch = model.generate(messages=CONVERSATIONS, max_new_tokens=3, ignore_eos=True)
        self.assertEqual(len(batch["tokens"]), 2)

    def test_info_and_errors(self):
        self.assertTrue(self.client.model("chat").info()["chat_template"])
        self.assertEqual(self.client.model("chat").info()["chat_templates"], ["default"])
        self.assertFalse(self.client.model("plain").info()["chat_template"])
        bad = self.client.model("bad").info()
        self.assertFalse(bad["chat_template"])
        self.assertIn("\"{% include %}\" is not supported", bad["chat_template_error"])
        with self.assertRaises(gpubox.RpcError) as e:
            self.client.model("plain").chat_template([{"role": "user", "content": "x"}])
        self.assertEqual(e.exception.code, "invalid_request")
        self.assertIn("has no chat template", str(e.exception))
        with self.assertRaises(gpubox.RpcError) as e:
            self.client.model("chat").chat_template([{"role": "robot", "content": "x"}])
        self.assertIn("chat template raised: unknown role robot", str(e.exception))
        with self.assertRaises(gpubox.RpcError) as e:
            self.client.call("model.chat_template", model="chat", messages=[1])
        self.assertIn("messages[0]: expected an object", str(e.exception))
        with self.assertRaises(gpubox.RpcError) as e:
            self.client.call("model.generate", model="chat", text="x", messages=[{"role": "user", "content": "x"}])
        self.assertIn("give exactly one of ids, text or messages", str(e.exception))
        with self.assertRaises(gpubox.RpcError) as e:
            self.client.call("model.chat_template", model="chat", tools=[])
        self.assertIn("tools: unknown parameter", str(e.exception))
        # modeld still serves after each refusal.
        self.assertIn("[USER] x", self.client.model("chat").chat_template([{"role": "user", "content": "x"}])["text"])

    def test_cli_generate_chat(self):
        done = subprocess.run([CLI, "model", self.agent.ipc, "generate", "chat", "Hi", "--chat", "--system", "Be brief.",
                               "--max-new-tokens", "3", "--ignore-eos", "--json"], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        ids = self.client.model("chat").chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                                                      add_generation_prompt=True)["ids"]
        self.assertEqual(json.loads(done.stdout)["prompt_tokens"], len(ids))
        usage = subprocess.run([CLI, "model", self.agent.ipc, "generate", "chat", "Hi", "--system", "x"], capture_output=True, text=True, timeout=60)
        self.assertEqual(usage.returncode, 2)
        self.assertIn("--system needs --chat", usage.stderr)


if __name__ == "__main__":
    unittest.main()
