import unittest

from textutils import count_words, reverse_words


class HiddenWords(unittest.TestCase):
    def test_reverse(self):
        self.assertEqual(reverse_words("one two three"), "three two one")

    def test_spaces(self):
        self.assertEqual(reverse_words("  a   b "), "b a")

    def test_count_still_works(self):
        self.assertEqual(count_words("x y"), 2)


if __name__ == "__main__":
    unittest.main()
