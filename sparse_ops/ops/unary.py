"""(built-in operators: unary; being written)"""
__all__: list = []
