"""Which chat template vLLM renders prompts with (`serve.chat_template: model | training | PATH | auto`).

Why it matters for training: consecutive calls of an episode merge into one training row only when call n+1's
prompt ids start with call n's prompt + reply. A template that re-renders past turns differently (drops
thinking, reformats tool calls) breaks that at every turn. TRL ships prefix-preserving "training" variants
of common templates; `auto` serves one when the model's own template is not prefix-preserving and TRL has a
variant for it. The choice is recorded in the run's settings (`chat_template_choice`) and shown by
`alight train`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentlightning_cli.errors import AlightError

CHOICES = ("model", "training", "auto")


@dataclass(frozen=True)
class TemplateChoice:
    choice: str  # model | training | path
    path: Path | None  # the Jinja file vLLM gets via --chat-template (None: the model's own)
    reason: str

    def label(self) -> str:
        return self.choice if self.path is None or self.choice != "path" else f"path:{self.path}"


def choose_template(setting: str, model_dir: Path, out_dir: Path) -> TemplateChoice:
    """Resolve the setting for `model_dir`; a training template is written to out_dir/chat_template.jinja."""
    if setting not in CHOICES:
        path = Path(setting).expanduser()
        if not path.is_file():
            raise AlightError(f"serve.chat_template: {setting!r} is neither model, training, auto nor a file",
                              hint="give a Jinja chat template file, or one of model | training | auto")
        return TemplateChoice("path", path.resolve(), "given as a file")
    if setting == "model":
        return TemplateChoice("model", None, "the model's own template (serve.chat_template: model)")
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    if not tokenizer.chat_template:
        raise AlightError(f"{model_dir}: the tokenizer has no chat template",
                          hint="set serve.chat_template to a Jinja file")
    preserving = is_chat_template_prefix_preserving(tokenizer)
    if setting == "auto" and preserving:
        return TemplateChoice("model", None, "the model's template is prefix-preserving")
    try:
        training = get_training_chat_template(tokenizer)
    except ValueError:
        training = None
    if training is None:
        if setting == "training" and not preserving:
            raise AlightError(f"{model_dir}: TRL has no prefix-preserving training template for this model's template",
                              hint="use serve.chat_template: model, or give your own template file")
        reason = ("the model's template is already training-compatible" if preserving
                  else "the model's template is not prefix-preserving and TRL has no training variant for it")
        return TemplateChoice("model", None, reason)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "chat_template.jinja"
    path.write_text(training, encoding="utf-8")
    return TemplateChoice("training", path, "TRL's prefix-preserving training variant of the model's template")
