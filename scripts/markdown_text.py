"""What the docs checks share of a Markdown page's text."""
import re


def blank_fences(text):
    """The page with fenced code blocks blanked (offsets and lines kept)."""
    return re.sub(r'^```.*?^```', lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text,
                  flags=re.M | re.S)
