"""pytest plugin for bench/llama_server_tests.sh: llama.cpp's server tests
offline.  Only the stories260K model is here, so the suite's step that starts
every preset once to download its model does nothing, and a test whose server
asks for another model (or a model URL) is skipped with the model's name."""
import pytest

STORIES = {("ggml-org/test-model-stories260K", None), ("ggml-org/models", "tinyllamas/stories260K.gguf")}


def pytest_configure(config):
    import utils

    utils.ServerPreset.load_all = staticmethod(lambda: None)
    start = utils.ServerProcess.start

    def start_offline(self, *args, **kwargs):
        repo, file = self.model_hf_repo, self.model_hf_file
        if self.model_url or self.model_draft or (repo and (repo, file) not in STORIES and
                                                  (repo, None) not in STORIES):
            pytest.skip(f"needs {self.model_url or self.model_draft or repo + (':' + file if file else '')}, "
                        "not available offline")
        return start(self, *args, **kwargs)

    utils.ServerProcess.start = start_offline
