"""(built-in operators: linalg; being written)"""
__all__: list = []
