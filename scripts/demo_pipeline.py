"""Load a compiled directory with transformers.pipeline and print its answer to a prompt."""

import sys

from transformers import pipeline


def main() -> None:
    directory, prompt = sys.argv[1], sys.argv[2].encode().decode("unicode_escape")
    generate = pipeline("text-generation", model=directory)
    print(generate(prompt, return_full_text=False)[0]["generated_text"])


if __name__ == "__main__":
    main()
