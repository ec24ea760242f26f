"""The default roost policy plugins (reach, limits, envelope, render, tools, handback,
settle), one package each."""
