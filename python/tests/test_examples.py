"""The runnable example in examples/python keeps working."""

import os
import subprocess
import sys
import unittest

import support


class ExamplesTest(unittest.TestCase):
    def test_vllm_sequence(self):
        support.need_binaries(self)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(support.ROOT, "python", "kvconnect"), os.path.join(support.ROOT, "python", "mooncake")]))
        out = subprocess.run([sys.executable, os.path.join(support.ROOT, "examples", "python", "vllm_sequence.py")],
                             capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("every block verified", out.stdout)
        self.assertEqual(out.stderr.count("WARNING kvconnect"), 2, "one fallback warning per engine")


if __name__ == "__main__":
    unittest.main()
