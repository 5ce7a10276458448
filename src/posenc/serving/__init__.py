"""Serving trained runs outside PyTorch: the CTranslate2 export (``posenc export``) and
translation with it (``posenc translate --engine ctranslate2``)."""
