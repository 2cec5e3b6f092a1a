"""Output produced between cells (a background thread's prints, a subprocess
still running after its cell, display() from a timer) is published on iopub,
in order, under the parent header of the cell that ran last, as ipykernel
does; it is never lost and never attributed to a later cell."""
import time
import unittest

from kernel_harness import TIMEOUT, KernelTestCase


class IdleOutputTest(KernelTestCase):
    def late_messages(self, parent_id, until, timeout=TIMEOUT):
        """iopub messages under parent_id (after its cell's idle) until until(messages) holds."""
        messages = []
        deadline = time.monotonic() + timeout
        while not until(messages):
            remaining = deadline - time.monotonic()
            self.assertGreater(remaining, 0, "late output did not arrive; got %r" % messages)
            try:
                msg = self.kc.get_iopub_msg(timeout=remaining)
            except Exception as error:
                if type(error).__name__ == "Empty":
                    continue
                raise
            if msg["parent_header"].get("msg_id") == parent_id:
                messages.append(msg)
        return messages

    @staticmethod
    def text(messages, name="stdout"):
        return "".join(m["content"]["text"] for m in messages
                       if m["msg_type"] == "stream" and m["content"]["name"] == name)

    def test_thread_output_after_the_cell_reaches_the_client(self):
        cell = self.execute(
            "import threading, time, sys\n"
            "def late():\n"
            "    time.sleep(0.5)\n"
            "    print('late from thread')\n"
            "    print('late error', file=sys.stderr)\n"
            "threading.Thread(target=late).start()\n")
        self.assertEqual(cell.content["status"], "ok")
        self.assertNotIn("late", cell.stream())
        parent = cell.reply["parent_header"]["msg_id"]
        late = self.late_messages(parent, lambda ms: "late error\n" in self.text(ms, "stderr"))
        self.assertEqual(self.text(late), "late from thread\n")
        self.assertTrue(all(m["msg_type"] == "stream" for m in late), late)

    def test_many_lines_between_cells_arrive_complete_and_in_order(self):
        cell = self.execute(
            "import threading, time\n"
            "def writer():\n"
            "    time.sleep(0.2)\n"
            "    for i in range(3000):\n"
            "        print('line', i)\n"
            "        if i % 500 == 0: time.sleep(0.01)\n"
            "threading.Thread(target=writer).start()\n")
        parent = cell.reply["parent_header"]["msg_id"]
        expected = "".join("line %d\n" % i for i in range(3000))
        late = self.late_messages(parent, lambda ms: self.text(ms).endswith("line 2999\n"))
        self.assertEqual(self.text(late), expected)

    def test_text_without_newline_between_cells_is_the_last_cells(self):
        first = self.execute("import threading\n"
                             "threading.Timer(0.2, lambda: print('no newline', end='')).start()\n")
        # Printed into Python's buffer while no cell runs, and nobody calls flush:
        # it still arrives, as the first cell's, before any other cell is sent.
        parent = first.reply["parent_header"]["msg_id"]
        late = self.late_messages(parent, lambda ms: "no newline" in self.text(ms), timeout=10)
        self.assertEqual(self.text(late), "no newline")
        self.assertEqual(self.execute("print('second cell')").stream(), "second cell\n")

    def test_subprocess_output_after_the_cell(self):
        cell = self.execute("import subprocess\n"
                            "subprocess.Popen(['sh', '-c', 'sleep 0.5; echo from-subprocess'])\n"
                            "None")
        parent = cell.reply["parent_header"]["msg_id"]
        late = self.late_messages(parent, lambda ms: "from-subprocess" in self.text(ms))
        self.assertEqual(self.text(late), "from-subprocess\n")

    def test_display_from_a_timer_between_cells(self):
        cell = self.execute("import threading\n"
                            "threading.Timer(0.3, lambda: display({'late': True}, raw=True)).start()\n")
        parent = cell.reply["parent_header"]["msg_id"]
        late = self.late_messages(parent, lambda ms: any(m["msg_type"] == "display_data" for m in ms))
        self.assertEqual(late[-1]["content"]["data"], {"late": True})
        self.assertEqual(self.execute("'alive'").of_type("execute_result")[0]["content"]["data"]["text/plain"],
                         "'alive'", "the display's thread got its answer and the kernel goes on")

    def test_output_between_cells_is_not_the_next_cells(self):
        first = self.execute("import threading, time\n"
                             "threading.Timer(0.3, lambda: print('between cells')).start()\n")
        time.sleep(1.5)  # the text is written while no cell runs, before the next cell is sent
        parent = first.reply["parent_header"]["msg_id"]
        late = self.late_messages(parent, lambda ms: "between cells" in self.text(ms), timeout=1)
        self.assertEqual(self.text(late), "between cells\n")
        second = self.execute("print('second cell')")
        self.assertEqual(second.stream(), "second cell\n")


if __name__ == "__main__":
    unittest.main()
