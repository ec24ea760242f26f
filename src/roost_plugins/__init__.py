"""The default roost policy plugins (reach, limits, envelope, render, tools), one package each."""
