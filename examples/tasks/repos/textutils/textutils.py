"""Small text helpers."""


def reverse_words(text: str) -> str:
    """'a b c' -> 'c b a': the words in reverse order, single spaces between them."""
    return " ".join(text.split()[::1])


def count_words(text: str) -> int:
    return len(text.split())
