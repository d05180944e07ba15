"""A tiny calculator with bugs for the example task set."""


def add(a, b):
    return a - b


def mean(values):
    return sum(values) / (len(values) + 1)
