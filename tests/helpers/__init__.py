"""Test helpers shared by the test packages: tiny runs, tiny models, dummy decoders, the Neishi model zoo."""
