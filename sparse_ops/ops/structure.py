"""(built-in operators: structure; being written)"""
__all__: list = []
