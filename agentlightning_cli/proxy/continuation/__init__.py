"""Exact continuation (issue 34): each call continues the ids the model actually saw and sampled.

Pure functions over alight's canonical chat form (the chat-completions body the translators build for every
protocol) and token ids; no I/O. `normalise` compares messages under a documented list of normalisations,
`segments` splits ids at end-of-turn ids and builds a continued prompt under the skew guard, `chains` keeps an
episode's conversations and classifies each new request as continue, fork, start or fallback.
"""
