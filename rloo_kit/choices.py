"""What a user names on the command line, kept where the command line can read it before any library
loads (`rloo-kit --help` and an argument error answer at once)."""

TASKS = ("arithmetic", "products", "gsm8k", "file")  # rloo_kit.tasks.load_task
BACKENDS = ("auto", "unsloth", "transformers")  # rloo_kit.models.load_model
